"""One-off studies behind figures and tables in docs/ (each runs as ``python -m experiments.studies.NAME``)."""
