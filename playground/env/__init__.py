"""What the process is told from outside: every PLAYGROUND_* environment variable (settings.py, read nowhere else)
and the rules for a request to an address a user gave (outbound.py). Just above the bottom: it imports only core/,
so the kernels, the models and the run may read it; the bottom itself (core/) reads no environment."""
