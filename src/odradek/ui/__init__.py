"""`odradek ui`: a live web dashboard of a cluster (model.py the pure state model, poller.py the
one reader of the cluster per server, server.py the aiohttp routes, static/ the page)."""
