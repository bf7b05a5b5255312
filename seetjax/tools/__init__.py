"""Tool calls, schemas, prompt renderings and safe execution (plain Python, no JAX).

Imports nothing of seetjax; environments, SEET, data and serving build on it.
"""

from seetjax.tools.calls import ParseError, ToolCall, parse_tool_calls
from seetjax.tools.executor import ExecutionErrorKind, ExecutionResult, ToolExecutor
from seetjax.tools.schema import ArgumentError, ArgumentErrorKind, ToolSchema, validate_call

__all__ = ["ArgumentError", "ArgumentErrorKind", "ExecutionErrorKind", "ExecutionResult",
           "ParseError", "ToolCall", "ToolExecutor", "ToolSchema", "parse_tool_calls",
           "validate_call"]
