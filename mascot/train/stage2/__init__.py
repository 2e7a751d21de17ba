"""Stage 2, the director: `config` (Stage2Config), `pipeline` (states -> GRPO, the run card) and `rewards`
(the group reward of an N-turn rollout and the directive format reward)."""
