"""One way to open a small ONNX model on the CPU (onnxruntime), shared by the VAD and
end-of-turn adapters."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cpu_session(path: str | Path, threads: int = 1) -> Any:
    """An ``onnxruntime.InferenceSession`` for ``path`` on the CPU provider: ``threads`` intra-op
    threads, one inter-op thread, sequential execution, full graph optimisation (onnxruntime's
    default), warnings off (severity 3)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
