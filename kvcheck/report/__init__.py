"""Report formats: one module per format behind the FORMATTERS registry."""
