"""Stage 1, persona-aware behavioural alignment: `config` (Stage1Config), `pipeline` (the run and its order),
`steps` (generate, judge, pairs, reward_model), `grpo` (the GRPO step) with `workers` (parallel adapter
processes), and the pieces they use: `data`, `pairs`, `reward_model`, `speakers`, `grpo_rollout`."""
