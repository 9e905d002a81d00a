"""What users look at: layouts and fragment-size histograms."""
