"""``computewise dashboard``: a read-only web view over the ledger, and the Grafana dashboard over our metrics."""
