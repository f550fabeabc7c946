from smooth.average import moving_average

__all__ = ["moving_average"]
