"""What every stage and the frontend share. Pure data and functions, no I/O."""
