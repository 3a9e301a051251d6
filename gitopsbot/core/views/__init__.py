"""What a person sees of the whole fleet: the rows of the fleet page (``fleet_view``), from the
records, the waves and drift. The top of ``core``: nothing in it imports this package.
"""
