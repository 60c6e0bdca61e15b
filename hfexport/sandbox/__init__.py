"""The sandbox: where a model repo's code and pickles run, holding no credential and writing
nowhere that a process holding one later reads or runs.

`identity.py` — what such a process is and holds: an environment without secrets (`child_env`), the
unprivileged user a root hfexport switches it to (`worker_user`, `sandboxed`), the folders lent to
it and taken back (`lend`, `reclaim`). `launch.py` — how it starts: in namespaces of its own where
the machine gives them (`wrap`, `refusal`; refused outright where neither protection is there,
`require`), and `spawn`, the one helper the planner and the export workers start through.
`namespaces.py` — the script that lays the mounts out inside them. `crossing.py` — how the parent
takes back what it wrote: regular files under the names the result lists, no link followed.
"""
