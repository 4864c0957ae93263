"""Pure functions of privacy accounting: RDP curves, conversions and order grids.
No state and no torch; everything is vectorised with numpy over configurations × orders."""
