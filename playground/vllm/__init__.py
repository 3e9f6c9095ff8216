"""Everything that talks to vLLM, in one package; none of it imports vllm (vLLM has an environment of its own,
scripts/install_vllm.sh).

engine.py runs worker.py (the one file that runs inside vLLM's environment) and holds the request and result types;
server.py reads a running OpenAI-compatible vLLM server by URL, serve.py starts one here; metrics.py parses vLLM's
spec-decode counters; models.py says what vLLM is given for our models; peer.py puts vLLM's rows beside ours (the
benchmark's `--compare-vllm`, the Compare pairs tab); report.py writes the report's vLLM section; tiny.py builds a
tiny pair vLLM's CPU build can load.
"""
