from calendarx.leap import days_in_month, is_leap_year

__all__ = ["days_in_month", "is_leap_year"]
