"""The commands of the `tapt` command line, by concept; tapt.cli assembles them."""
