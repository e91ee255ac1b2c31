"""What each registered check holds, in one short phrase: the checks legend of the report
reads it beside the check's code. Keyed by the check's name in ``CHECKS``
(``harness.pipeline.checks``); ``tests/harness/pipeline/test_check_phrases.py`` holds the
two to the same names. The full statements are the checks table of ``docs/design.md``."""

from __future__ import annotations

CHECK_PHRASES: dict[str, str] = {
    "ran": "construction, staging and the call returned, with buffers of the right shape",
    "outputs_written": "every live output entry written with a valid value",
    "no_writes_outside_batch": "the buffers' rows past the live batch left as they were",
    "teacher_forcing": "corrected_out equals the logits rebuilt from the emitted tokens",
    "noise_replay": "the recorded noise with corrected_out reproduces the emitted tokens",
    "greedy_consistency": "greedy fold: each token is the argmax of its own step logits",
    "greedy_rows_argmax": "folded: a greedy row's token is a maximum of its corrected logits",
    "support": "every emitted token has non-zero probability under its own q",
    "fresh_noise": "a second staged call draws new noise and passes teacher forcing and replay",
    "noise_shared_with_verifier": "the drafter's and the verifier's (key, counter) never meet",
    "torch_stream_shared_with_verifier": "the call reads only the stretch of torch's stream "
    "it moved the generator over",
    "noise_budget": "exactly gamma exponential_ draws of [bs, V] per folded call, nothing else",
    "single_walk": "one walk (or one fused call) and at most gamma head steps per call",
    "inputs_unchanged": "hidden states, ids, model and sampling parameters left as given",
    "state_restored": "global state (dtype, device, environment, flags) as found",
    "life_replays": "every replay of the case's life passes every lossless per-call check",
    "life_server_buffer": "the out= buffer passed at construction holds every replay's tokens",
    "life_fresh_noise": "no replay of the life reuses the noise of an earlier replay",
    "life_drop_in": "every replay of the life keeps the noise budget and the single walk",
    "matches_reference": "the same tokens, corrected logits and confidence as the reference",
}
