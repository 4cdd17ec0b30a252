"""Declarative workflows: JSON statecharts with DAG work, run durably by the engine.

``compiler``     validate a ``$workflow: "0.2"`` document and lower it to a JSON compiled form
``dag``          ``$dag: "0.1"`` work: nodes, edges, waves of nodes that run concurrently
``cycles``       the proof that every automatic cycle passes a state with a ``limit``
``expressions``  JMESPath guards, inputs and ``with`` (compiled once, evaluated purely)
``shape``        members: the ones an object takes, the ones it needs, storable text
``pointers``     JSON pointers, and the paths that name states (``"ship/pack"``)
``tasks``        ``@durableflow.task``: the only callables a document can name
``machine``      one state's step, pure: guards, events, visits (the interpreter's logic)
``interpreter``  a compiled document run as a workflow function on ``ctx``
``waiting``      ``on`` states on the engine's event waits and timers
``source``       the registry hook: documents found by name next to code workflows, pinned
                 by revision; ``MemoryDocuments`` for the in-memory tester
``diagram``      the statechart drawn as SVG

Plain Python like the engine: the ``WorkflowDocument`` model, its API and admin pages live
in the Django face (``durableflow.models``, ``durableflow.orm.documents``, ``api``, ``admin``).
"""

from durableflow.documents.compiler import compile_document
from durableflow.documents.tasks import TaskDefinition, task, tasks

__all__ = ["compile_document", "task", "tasks", "TaskDefinition"]
