"""The list-query measurement, in its own process and database: ``python -m bench.listing_run CONFIG OUT``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    if config["backend"] == "postgres":
        import psycopg

        with psycopg.connect(config["admin_url"], autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{config["list_database"]}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{config["list_database"]}"')
    else:
        Path(os.environ["DATABASE_URL"].removeprefix("sqlite:///")).unlink(missing_ok=True)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from bench import listing

    sizes = config["sizes"]
    out.write_text(json.dumps(listing.measure(sizes["list_sizes"], sizes["list_repeats"]), indent=1))


if __name__ == "__main__":
    main()
