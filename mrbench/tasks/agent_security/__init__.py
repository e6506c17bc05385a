"""Agent security: tool use under prompt injection (embedded environment and AgentDojo v1.2.2).

Public API; the engine lives in the submodules (importing this package loads no data, model or
AgentDojo code):

- :func:`agent_security` — the registered factory (``mrbench`` task ``agent-security``);
- :class:`AgentSecurityTask` — the built task (samples, rewards, evaluation, training hooks).
"""

from mrbench.tasks.agent_security.task import AgentSecurityTask, agent_security

__all__ = ["AgentSecurityTask", "agent_security"]
