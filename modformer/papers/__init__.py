"""The three papers this repository tests, each a plugin like one installed from outside:
pyproject.toml declares each package's `register` as an entry point of the group
`modformer.papers`, and `import modformer` loads them through that group alone
(modformer/plugins.py; docs/plugins.md). Nothing in the library imports this folder."""
