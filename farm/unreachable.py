"""A database or broker that does not answer, or a database that refuses the URL's role,
told in one line instead of a traceback.

Each line names the service (its URL with the password hidden), the driver's reason and
what to check. The CLI maps raw driver errors to these lines in one place
(``service_error``, given the URLs of its settings): any command may meet them at any call
site (a query, a schema check, a post), and an operator needs the same line from all of
them. Code that catches such an error itself raises the same ``ServiceUnavailable``
through the two builders, with the URL it used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from farm.errors import ConfigError, FarmError, ServiceUnavailable, first_line
from farm.settings import redact_url

if TYPE_CHECKING:
    from sqlalchemy.exc import DBAPIError


def _address(url: str) -> str:
    """``-h HOST -p PORT`` for pg_isready and redis-cli, as far as the URL gives them (none
    for a URL that does not parse)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return ""
    return "".join(f" -{flag} {value}" for flag, value in (("h", parsed.host),
                                                           ("p", parsed.port)) if value)


def database_unreachable(url: str, exc: DBAPIError) -> ServiceUnavailable:
    """The database at ``url`` failed with ``exc``: which, why, and what to check."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    # As the operator wrote it: postgresql://, not the driver the farm picked for it.
    where = redact_url(parsed.set(drivername=parsed.get_backend_name())
                       .render_as_string(hide_password=False))
    reason = redact_url(first_line(exc.orig))
    if parsed.get_backend_name() == "sqlite":
        return ServiceUnavailable(f"cannot use the database {where}: {reason}; check that the "
                                  "data dir (FARM_DATA_DIR) is writable and its disk not full")
    return ServiceUnavailable(f"cannot connect to the database {where}: {reason}; check that "
                              f"PostgreSQL runs and accepts connections (`pg_isready"
                              f"{_address(url)}`) and that FARM_DATABASE_URL is right")


def broker_unreachable(url: str, exc: Exception) -> ServiceUnavailable:
    """The broker at ``url`` failed with ``exc``: which, why, and how to check it."""
    return ServiceUnavailable(f"cannot reach the broker {redact_url(url)}: "
                              f"{redact_url(first_line(exc))}; "
                              f"check that Redis runs (`redis-cli{_address(url)} ping`) and "
                              "that FARM_BROKER_URL is right")


def permission_denied(url: str, exc: DBAPIError) -> ConfigError:
    """The database refused the URL's role what the command does: most likely the worker
    role's URL where the owner's is needed."""
    from sqlalchemy.engine import make_url

    role = make_url(url).username or "this URL's role"
    return ConfigError(f"the database refused {role}: {redact_url(first_line(exc.orig))}; "
                       "is FARM_DATABASE_URL the worker role's? `farm submit`, `cancel` and "
                       "`db` need the owner's URL, the role that ran `farm db upgrade`")


# PostgreSQL's SQLSTATE for "permission denied" (insufficient_privilege).
INSUFFICIENT_PRIVILEGE = "42501"


def service_error(exc: Exception, database_url: str, broker_url: str | None,
                  ) -> FarmError | None:
    """The operator's line if ``exc`` means the database or the broker does not answer, or
    the database refuses the role its URL logs in as; it names ``database_url`` or
    ``broker_url`` (the command's settings)."""
    # Imported here: most commands never meet these errors, and `farm --help` should not
    # wait for kombu, redis and SQLAlchemy to load.
    from sqlalchemy.exc import ProgrammingError

    from farm.retry import BROKER_ERRORS, DATABASE_ERRORS

    if (isinstance(exc, ProgrammingError)
            and getattr(exc.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE):
        return permission_denied(database_url, exc)
    if isinstance(exc, DATABASE_ERRORS):
        return database_unreachable(database_url, cast("DBAPIError", exc))
    if isinstance(exc, BROKER_ERRORS):
        return broker_unreachable(broker_url or "", exc)
    return None
