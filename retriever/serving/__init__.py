"""An index served from Ray actors that hold its shards in memory."""
