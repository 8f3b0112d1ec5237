"""Settings: Django's PostgreSQL backend (psycopg 3) and Jobwarden on the same database."""

import os

from psycopg.conninfo import conninfo_to_dict

# One DSN for both: Jobwarden reads JOBWARDEN_DSN; Django's DATABASES is built from it.
JOBWARDEN_DSN = os.environ["JOBWARDEN_DSN"]
_db = conninfo_to_dict(JOBWARDEN_DSN)

SECRET_KEY = "recipe-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["orders"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname"),
        "USER": _db.get("user"),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
