"""Building and measuring the crisis classifiers: the labelled lines (`data`), the encoder fit (`fitting`), the
cross-validated thresholds (`thresholds`) and `python -m mascot safety train` (`pipeline`)."""
