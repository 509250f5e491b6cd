"""One tierlm per device behind Ray Serve (``pip install 'tierlm[ray]'``;
docs/distributed.md "Ray Serve").

- ``TierlmReplica`` (``replica``): a deployment whose replicas are each one
  device's tierlm, with async methods only;
- ``TierlmRequestRouter`` (``router``): Serve's request router, placing by
  ``tierlm.cluster.rank`` on the replicas' routing stats;
- ``TierlmIngress`` (``ingress``): the OpenAI-compatible endpoint, with the
  gateway's parsing, keys and SSE; a 429 tries the next replica, a request
  that streamed nothing is queued again when its replica dies;
- ``build`` and ``start_local`` (``app``): the application, and a local Ray
  on 127.0.0.1.

The router API is alpha in Ray: the extra pins its minor version.
"""

from tierlm.ray.app import LOOPBACK_ENV, FleetArgs, build, max_ongoing, start_local

__all__ = ["LOOPBACK_ENV", "FleetArgs", "build", "max_ongoing", "start_local"]
