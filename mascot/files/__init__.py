"""Where things live on disk: the embedded model files and their caches (`model_files`), trained runs and their
adapters (`checkpoints`), and paths confined to an allowed folder (`safe_paths`)."""
