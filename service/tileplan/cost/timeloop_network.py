"""Energy of Timeloop's inferred networks, as timeloop-model charges it (its legacy network between each storage
level and the level or MACs below it), for the figures a v0.3 or legacy file can state on a storage level:

- per word sent, each multicast counted once: `hops(m, F)` hops and `1 + hops(m, F)` routers, where m is the multicast
  factor (children receiving the same word) and F the map's spatial fan-out at the level; timeloop-model estimates
  the hops of a word entering an F-node array at its centre and reaching m of them as
  `sqrt(F m) + (sqrt(F) - sqrt(m)) / 2 - sqrt(F / m) + 1/2` (so 1/2 hop even without a fan-out);
- a hop costs `energy-per-hop`, else `wire-energy` (pJ per bit per mm) x the network's word bits x the hop's
  length (`tile-width`, or the floorplan's child tile width), a router `router-energy`; Timeloop's own table has
  neither (0);
- routers are counted in whole numbers, summed over the multicast factors (timeloop-model keeps an integer tally and
  drops the fraction at each addition);
- words the children pass each other over mesh links cost a hop and two routers each;
- outputs sent to a level that cannot add them in place (a DRAM, or one stating `reduction_supported: false`) cross
  the network twice (read, then written back), less the first update of each word;
- per instance of the level in use, summed over the three tensors; a level that bypasses a tensor still carries
  the traffic of the tensor between the levels around it (`cost/timeloop.py`, `_networks`).

Spatial reductions (partial sums added on the way) cost nothing: Timeloop's table has no adder energy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tileplan.cost.timeloop import NetTraffic


def num_hops(multicast: int, fanout: int) -> float:
    """Hops of one word from the array's entry to `multicast` of its `fanout` children (timeloop-model's
    probabilistic multicast estimate)."""
    rf, rn = math.sqrt(multicast), math.sqrt(fanout)
    return rn * rf + 0.5 * (rn - rf) - rn / rf + 0.5


def network_pj(traffic: NetTraffic, hop_pj: float, router_pj: float) -> float:
    """One tensor's energy on the network below a level, over the level's instances in use."""
    if not hop_pj and not router_pj:
        return 0.0
    wire, routers = 0.0, 0
    for m, words in sorted(traffic.ingress.items()):
        if words > 0:
            h = num_hops(m, traffic.fanout)
            routers = int(routers + (1 + h) * words)
            wire += h * words
    per_instance = wire * hop_pj + routers * router_pj + traffic.links * (hop_pj + 2 * router_pj)
    return per_instance * traffic.instances
