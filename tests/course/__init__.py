"""The course package (dlcourse) and the lectures: exercises, measurements, data, plots, lectures run top to bottom."""
