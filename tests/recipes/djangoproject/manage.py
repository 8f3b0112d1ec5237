"""The Django project of the recipe in docs/recipes.md (run by tests/recipes/test_django.py)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djangosite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
