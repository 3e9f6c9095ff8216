"""Speculative Decoding Playground: a lossless speculative decoder and the views around it."""
