"""The launchers: validate (contract), then dispatch (registry). Nothing else happens in a launcher."""
