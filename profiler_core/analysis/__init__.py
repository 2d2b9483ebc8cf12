"""What a measurement means: trace parsing, the decomposition of the headline saving, the
per-mode figures and the prediction of a graph's time from an eager trace."""
