"""The parts of ``servesim.live`` (its public API is there): ``snapshot`` (the frozen snapshot
types) and ``views`` (what every live run shows, read from a fleet's read-only snapshot)."""
