"""The one Redis seam: a single node (auto-pipelined), a cluster, or the embedded fakeredis, chosen
once at start (``open.open_redis``)."""
