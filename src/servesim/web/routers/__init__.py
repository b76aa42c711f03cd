"""One router per resource: traces, runs (simulate, saturate, tune, advise), jobs, plans, catalog, pages."""
