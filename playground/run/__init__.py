"""The run: the typed run description (spec), the runner session, start-up, kept prefixes, recorded runs. It may
import every layer below the views (env/ among them: the settings and outbound requests)."""
