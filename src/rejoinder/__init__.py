"""rejoinder: a real-time voice agent runtime and an honest latency harness."""
