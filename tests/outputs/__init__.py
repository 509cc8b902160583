"""What goes back (autograder/outputs/): feedback pages, reports, similarity, exports, safe pages."""
