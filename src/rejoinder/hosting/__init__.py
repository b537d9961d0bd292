"""Hosting arrangements: the embedded models behind the services' wire protocols (Cartesia Sonic
and Ink WebSockets, a SageMaker-shaped response stream), network profiles between the agent and
its model servers, and the arrangements the harness compares."""
