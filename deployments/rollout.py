"""How Serve replaces replicas when a deployment's version changes (a `serve deploy` with new
application arguments, a management activation whose arguments changed, new code).

Serve's default stops an old replica before it starts its replacement. A deployment with one
replica (the Router, the classifiers, the Embedding, most of the graph on a small cluster) then
has none for as long as the new one takes to load its models: 40 to 70 s on 2 busy cores, and
every request waiting on it in an Ingress times out (3 of 711 in the `serve deploy` test). With
a surge the replacement starts first and the old replica stops once it serves, so there is
always one. A replacement that finds no room waits while the old replica keeps serving.

LLMServer keeps Serve's default: a second engine on a full GPU would wait forever.
"""

from __future__ import annotations

# Extra replicas allowed during a roll-out, as a percentage of the target count (rounded up).
SURGE_PERCENT = 100
