"""Where the worker processes of a server run live: this machine (:mod:`trserve.cluster.local`, the default) or
the nodes of a Ray cluster (:mod:`trserve.cluster.ray_spawner`, ``cluster:`` in the serve config).

A spawner turns a :class:`trserve.cluster.handles.LaunchOrder` into a running process and hands back a
:class:`trserve.cluster.handles.WorkerProcess`, the one interface the launcher watches, restarts and stops. Ray is
imported only when a Ray spawner is made.
"""
