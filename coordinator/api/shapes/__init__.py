"""Every JSON answer of the API, stated once: one ``TypedDict`` per shape, in the module of its
concept (``host``, ``tasks``, ``fleet``, ``runs``, ``access``; ``common`` the vocabulary they are
written in, the error and the operations' answers), each read here as ``shapes.Name``.

The views (``responses.py`` and the handlers) are annotated with these, so mypy refuses a view
that adds, drops or misspells a field, and ``openapi.py`` generates the document's response
schemas from them (pydantic's ``TypeAdapter``, as the request bodies' in ``bodies/``): a client
generated from ``/openapi.json`` sees every field the server sends. ``tests/coordinator/
response_shapes.py`` runs every answer the HTTP-level tests receive through its route's schema
with additional properties forbidden, so a field added to a view and not to its shape fails a test.

A shape for a new route (a new concept gets a module of its own, star-imported below):
1. Define a ``TypedDict`` in its concept's module, named as its schema is to be
   (``class SessionOpened(TypedDict)``, from ``typing_extensions``: pydantic reads only that one on
   Python 3.11); nested objects are ``TypedDict``s too, each a schema of its own. A field every
   answer carries is plain; one only some answers carry is ``NotRequired``; one that may be null
   is ``X | None``. Vocabulary comes from ``wire`` through ``common``'s aliases (``Id``, ``Time``,
   ``TaskStatus``, ``one_of(...)``), never restated.
2. Annotate the view that builds it (``def session_view(...) -> shapes.SessionOpened``), or the
   variable (``answer: shapes.SessionOpened = {...}``), and build it as a literal, so mypy checks
   its keys. A call (``shapes.SessionOpened(session_id=...)``) is checked alike but costs a
   microsecond or two a request: fine for the operator API, not on the host API's hot calls.
3. Name it in the route's ``Endpoint`` (``{201: "SessionOpened"}``): every ``TypedDict`` of these
   modules is in the document (``SHAPES``), and a name the table uses that no module defines
   fails ``openapi_document``.

Types only: nothing here runs per request (a ``TypedDict`` is a plain dict at run time).
"""

from __future__ import annotations

from typing_extensions import is_typeddict

# Star imports: every shape is read as ``shapes.Name``, wherever its concept's module is.
from coordinator.api.shapes.access import *  # noqa: F403  (read as shapes.Name)
from coordinator.api.shapes.common import *  # noqa: F403  (read as shapes.Name)
from coordinator.api.shapes.fleet import *  # noqa: F403  (read as shapes.Name)
from coordinator.api.shapes.host import *  # noqa: F403  (read as shapes.Name)
from coordinator.api.shapes.runs import *  # noqa: F403  (read as shapes.Name)
from coordinator.api.shapes.sessions import *  # noqa: F403  (read as shapes.Name)
from coordinator.api.shapes.tasks import *  # noqa: F403  (read as shapes.Name)

# Every shape, by name: each TypedDict of the package's modules.
SHAPES: dict[str, type] = {name: value for name, value in dict(globals()).items()
                           if is_typeddict(value) and value.__module__.startswith(__name__ + ".")}
