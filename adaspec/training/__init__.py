"""`adaspec train-draft` (R-B6): self-distillation data (distill), losses, training loop (trainer),
acceptance report and confidence calibration (evaluate), text sources and splits (corpus), CLI (cli)."""
