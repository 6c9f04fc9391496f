"""Reports: tables, plots (matplotlib, Agg) and traces. Charts turn results into figures; no physics."""
