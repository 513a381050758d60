"""pykueue's certificate generator (``certs.pki``) and its command line (``certs.generate``).

Development and lab tooling, not the runtime: nothing under ``app/`` imports it. Generated
files go to ``certs/out/`` (git-ignored); see certs/README.md.
"""
