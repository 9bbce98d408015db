"""Engines behind one protocol (base.Engine), chosen by name from config.ENGINES."""
