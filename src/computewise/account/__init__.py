"""Accounting: what runs cost, grouped by tag and period; budgets, alerts and spend anomalies."""
