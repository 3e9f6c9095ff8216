"""The bottom: the kinds and config types, the decoding types, errors, numbers, progress, input shapes,
round records and the theory's pure math. It imports nothing of the playground above it."""
