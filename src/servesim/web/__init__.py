"""The web workbench: a FastAPI app over servesim's public API and views (``servesim serve``).

Layout (FastAPI's "bigger applications"): ``app`` (the factory), ``settings``, ``db`` (SQLAlchemy 2:
traces and jobs), ``storage`` (files under the data folder, named by the server only), ``jobs``
(bounded worker processes with progress, cancel and time limits), ``work`` (what a job runs, in
its process), ``problems`` (RFC 9457 errors), ``security`` (token, headers), ``routers/`` (one
module per resource) and ``static/`` (the page: no inline script, Plotly.js from the plotly wheel).
"""
