"""The Optuna storage URL (``storage``): whether Optuna could open it, checked without
connecting, and the file of a SQLite URL.

Pure module: SQLAlchemy and the database driver are imported only inside
:func:`check_storage`.
"""

from __future__ import annotations

from pathlib import Path

from hpsearch.errors import ConfigError


#: pip packages of the DBAPI drivers people usually mean, by SQLAlchemy driver name.
_DRIVER_PACKAGES = {"psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]",
                    "pymysql": "PyMySQL", "mysqldb": "mysqlclient", "pg8000": "pg8000",
                    "mysqlconnector": "mysql-connector-python", "oracledb": "oracledb",
                    "pyodbc": "pyodbc", "cx_oracle": "cx_Oracle"}


def check_storage(url: str) -> None:
    """Check that Optuna's RDB storage could open ``url``, without connecting.

    The URL must parse, name a database SQLAlchemy knows, with a synchronous driver that
    is installed; a SQLite file must be in an existing folder (an in-memory SQLite
    database would vanish with the driver). Imports SQLAlchemy and the driver only here.

    Raises:
        ConfigError: On ``storage``; the URL is shown with its password hidden.
    """
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError:
        raise ConfigError("storage", "is not a database URL such as "
                          "'sqlite:///path.db' or 'postgresql://user@host/db'", url) from None
    shown = parsed.render_as_string(hide_password=True)
    try:
        dialect = parsed.get_dialect()
    except sa_exc.NoSuchModuleError:
        scheme = parsed.drivername
        raise ConfigError("storage", f"unknown database scheme {scheme!r} (SQLAlchemy has no "
                          "such dialect; e.g. sqlite, postgresql, mysql)", shown) from None
    driver = parsed.get_driver_name()
    if getattr(dialect, "is_async", False):
        raise ConfigError("storage", f"driver {driver!r} is asynchronous; Optuna's storage "
                          "needs a synchronous one (e.g. postgresql+psycopg2)", shown)
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        package = _DRIVER_PACKAGES.get(driver, driver)
        raise ConfigError("storage", f"driver {driver!r} is not installed "
                          f"(pip install {package}; {exc})", shown) from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if not database or database == ":memory:":
            raise ConfigError("storage", "an in-memory SQLite database vanishes with the "
                              "driver; give a file, e.g. sqlite:///path/optuna.db", shown)
        if not database.startswith("file:") and not Path(database).parent.is_dir():
            raise ConfigError("storage", f"the folder of the SQLite file "
                              f"({Path(database).parent}) does not exist", shown)



def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` storage URL, or None for another database."""
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///"):])
    return None
