"""tf_inspector: see what tf.function made of your code, and why it retraced.

    report = tf_inspector.trace_and_inspect(fn, tf.ones([2, 3]))   # tracing.py
    report.to_text(); report.to_json(); report.to_dot()             # report.py
    f = tf_inspector.watch(tf_function); f(x); print(f.explain())  # retrace.py
    with tf_inspector.monitor() as m: ...
    tf_inspector.xla_cost(fn, tf.ones([2, 3])).to_text()            # xla.py
    tf_inspector.mlir_view(fn, tf.ones([2, 3])).to_text()           # mlir.py
    tf_inspector.profile(fn, tf.ones([2, 3]), steps=10).to_text()   # profile.py
    tf_inspector.quant_debug(model, int8_converter, samples).to_text()  # quant_debug.py
"""

from tf_inspector.mlir import MlirView, mlir_view
from tf_inspector.profile import NodeTime, Profile, profile
from tf_inspector.quant_debug import LayerError, QuantDebugReport, quant_debug
from tf_inspector.report import GraphReport, NodeInfo, TensorInfo
from tf_inspector.retrace import REASONS, TraceEvent, TraceWarning, monitor, watch
from tf_inspector.tracing import TracingError, trace_and_inspect
from tf_inspector.xla import XlaCost, xla_cost

__all__ = ["GraphReport", "LayerError", "MlirView", "NodeInfo", "NodeTime", "Profile",
           "QuantDebugReport", "REASONS", "TensorInfo", "TraceEvent", "TraceWarning",
           "TracingError", "XlaCost", "mlir_view", "monitor", "profile", "quant_debug",
           "trace_and_inspect", "watch", "xla_cost"]
