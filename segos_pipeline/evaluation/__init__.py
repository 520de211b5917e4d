"""Evaluation layer: replay metrics, simulated and synthetic data, the evaluation study and its reports."""
