"""Jobs: every long command (training stages, evaluations, sweeps, the safety evaluation) launched, queued,
followed and cancelled from one persistent runner, and the progress events those commands write."""
