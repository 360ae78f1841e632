"""Serving a model cheaply: the dynamic-batching server, the open-loop load tester.

runners     what is served: an exported artifact, a Python entry point, or an echo; input validation
costmodel   the online model of what a batch costs (batch size x padded length)
batcher     the bounded queue, the batching policies (none, greedy, cost), SLO admission, isolation
metrics     Prometheus metrics of one server (its own registry)
cache       the prediction cache: repeated inputs answered before the batcher (byte-bounded LRU, TTL)
app         the Starlette app: infer, models, probes, metrics, OpenAPI document, bearer auth
server      ``computewise serve``: uvicorn, warm-up, graceful SIGTERM drain, the ledger run
loadtest    open-loop Poisson load, latency percentiles, the highest rate within an SLO
"""
