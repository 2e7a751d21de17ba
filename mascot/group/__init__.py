"""The conversation engine: one step (safety check -> director -> speaker -> output guard) that the live chat,
the CLI, evaluation and training rollouts all go through, so a table measures what a user gets.

- `dialogue`: turns and directives; `personas`: persona packs; `prompts`: the speaker and director prompts
  shared by chat and training;
- `director`: who speaks next, with an action and a tone (trained, prompted, round-robin, random, manual);
- `speaker`: a persona's reply on its own adapter, drawn again when unusable; `cleaning`: raw output made into
  one in-character message;
- `chat`: `GroupChat`, the step itself, streamed (`respond`) or batched (`step_batch`, `respond_batch`) under a
  `SafetyPolicy`;
- `engine`: the process's backend, adapters and crisis detector, and a GroupChat per session;
- `rollouts`: conversations with a simulated user; `transcripts`: JSON and Markdown exports; `cli`: `mascot chat`.
"""
