from jobwarden.cli import run

run()
