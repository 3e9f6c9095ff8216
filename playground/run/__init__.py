"""The run: the typed run description (spec), the runner session, start-up, kept prefixes, recorded runs,
the settings read from the environment and outbound requests. It may import every layer below the views."""
