class PlaygroundError(ValueError):
    """A problem the user can fix (bad input, a model that cannot load). Its message is shown as is."""
