"""Rules with stable codes and the evaluation that applies them to measured or predicted pools."""
